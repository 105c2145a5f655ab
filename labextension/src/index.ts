/**
 * mt-magic's JupyterLab extension: %%mtsql cells edited as Spark SQL, and their errors underlined
 * where the kernel says they lie. Nothing else in the notebook changes.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICellModel } from '@jupyterlab/cells';
import { EditorExtensionRegistry, IEditorExtensionRegistry } from '@jupyterlab/codemirror';
import { INotebookTracker } from '@jupyterlab/notebook';

import { mtsqlCell } from './cells';
import { followErrors } from './errors';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'mt-magic:mtsql-cells',
  description: '%%mtsql cells edited as Spark SQL; their errors underlined where they lie.',
  autoStart: true,
  requires: [IEditorExtensionRegistry],
  optional: [INotebookTracker],
  activate: (
    _app: JupyterFrontEnd,
    editors: IEditorExtensionRegistry,
    notebooks: INotebookTracker | null
  ) => {
    editors.addExtension({
      name: 'mt-magic:mtsql',
      factory: ({ model }) =>
        (model as Partial<ICellModel>).type === 'code'
          ? EditorExtensionRegistry.createImmutableExtension(mtsqlCell(model.sharedModel.getSource()))
          : null
    });
    if (notebooks) {
      followErrors(notebooks);
    }
  }
};

export default plugin;
